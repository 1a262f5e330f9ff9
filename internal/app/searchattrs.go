package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc/codes"

	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/dial"
	"github.com/dedupio/dedup/sink/starter"
)

// TemporalNamespaces is every namespace cfg starts runs in: the default,
// then each route's and each trigger's own, once each.
func TemporalNamespaces(cfg config.Config) []string {
	seen := map[string]bool{}
	var out []string
	add := func(ns string) {
		if ns == "" {
			ns = cfg.Temporal.Namespace
		}
		if !seen[ns] {
			seen[ns] = true
			out = append(out, ns)
		}
	}
	add("")
	for _, r := range cfg.Routes {
		add(r.Namespace)
	}
	for _, t := range cfg.Schedules.Triggers {
		add(t.Namespace)
	}
	return out
}

// resolveSearchAttributes checks, at start-up, that every namespace cfg
// starts runs in has dedup's search attributes (starter.SearchAttributes),
// and returns the mode the starters run with:
//   - on: a namespace that lacks one ends start-up with the error naming
//     each missing attribute and the command that creates it
//     (starter.MissingSearchAttributesError);
//   - auto: such a namespace turns them off, with a warning;
//   - off: nothing is asked.
//
// A server that will not list them (PermissionDenied: an API key without
// the operator's rights; Unimplemented: a proxy) cannot be checked: on
// stays on, with a warning (a start that meets an undefined attribute
// waits, starter.IsPermanent, never dead-letters), auto turns off. Temporal
// being unreachable is waited for, as in waitTemporal.
func resolveSearchAttributes(ctx context.Context, cfg config.Config, tc client.Client, deps *dependencies, log *slog.Logger) (starter.SearchAttributesMode, error) {
	mode := cfg.Temporal.SearchAttributes
	if mode == starter.SearchAttributesOff {
		return mode, nil
	}
	nss := TemporalNamespaces(cfg)
	var missing *starter.MissingSearchAttributesError
	var unchecked error
	refused := refusedTemporal(cfg)
	err := deps.waitFor(ctx, depTemporal, cfg.Retry, func(err error) error {
		if errors.As(err, &missing) {
			return err // under on only: try takes it under auto
		}
		return refused(err)
	}, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := starter.CheckSearchAttributes(ctx, tc.OperatorService(), nss)
		switch {
		case uncheckable(err):
			unchecked = err
			return nil
		case mode == starter.SearchAttributesAuto && errors.As(err, &missing):
			return nil
		}
		return err
	})
	switch {
	case err != nil:
		return mode, err
	case unchecked != nil && mode == starter.SearchAttributesAuto:
		log.Warn("temporal.search_attributes: auto: the namespaces' search attributes cannot be listed: runs carry none", "err", unchecked)
		return starter.SearchAttributesOff, nil
	case unchecked != nil:
		log.Warn("temporal.search_attributes: on: the namespaces' search attributes cannot be listed, so they are not checked; "+
			"a start that meets an undefined one waits (dedup_retries_total) until it is created", "err", unchecked)
		return mode, nil
	case missing != nil:
		log.Warn("temporal.search_attributes: auto: runs carry no search attributes", "why", missing.Error())
		return starter.SearchAttributesOff, nil
	}
	log.Info("runs carry search attributes", "namespaces", nss)
	return starter.SearchAttributesOn, nil
}

// uncheckable: Temporal will not list search attributes to this client.
func uncheckable(err error) bool {
	if err == nil {
		return false
	}
	var denied *serviceerror.PermissionDenied
	return errors.As(err, &denied) || serviceerror.ToStatus(err).Code() == codes.Unimplemented
}

// CheckSearchAttributes is `dedup validate`'s check of the namespaces'
// search attributes, when Temporal answers within a few seconds: the
// error start-up would stop with, or a line saying what was found.
func CheckSearchAttributes(ctx context.Context, cfg config.Config) (string, error) {
	if cfg.Temporal.SearchAttributes == starter.SearchAttributesOff {
		return "search attributes off", nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	tc, err := dial.DialTemporal(ctx, cfg, log, nil)
	if err != nil {
		return fmt.Sprintf("search attributes not checked: Temporal not reached (%v)", err), nil
	}
	defer tc.Close()
	err = starter.CheckSearchAttributes(ctx, tc.OperatorService(), TemporalNamespaces(cfg))
	var missing *starter.MissingSearchAttributesError
	switch {
	case err == nil:
		return "search attributes present", nil
	case errors.As(err, &missing) && cfg.Temporal.SearchAttributes == starter.SearchAttributesAuto:
		return "search attributes missing, auto: runs would carry none (" + missing.Error() + ")", nil
	case errors.As(err, &missing):
		return "", err
	}
	return fmt.Sprintf("search attributes not checked (%v)", err), nil
}
