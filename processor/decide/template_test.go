package decide

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestParseIDTemplate(t *testing.T) {
	for _, ok := range []string{"order-{data.order_id}", "{activity_id}/{data.a.b.c}", "singleton", "x-{data.k}-{data.k}", "été-{data.ü}"} {
		if _, err := ParseIDTemplate(ok); err != nil {
			t.Errorf("ParseIDTemplate(%q): %v", ok, err)
		}
	}
	for in, want := range map[string]string{
		"":                        "empty",
		"order-{id}":              "unknown placeholder {id}",
		"order-{data}":            "unknown placeholder {data}",
		"order-{data.}":           "empty path segment",
		"order-{data.a..b}":       "empty path segment",
		"order-{data.a":           "'{' without its '}'",
		"order-{data.{a}}":        "'{' without its '}'",
		"order-}":                 "'}' without its '{'",
		"order-\t{data.a}":        "control character",
		"activity-x:{data.a}":     "activity-",
		strings.Repeat("x", 1001): "over Temporal's 1000",
	} {
		_, err := ParseIDTemplate(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseIDTemplate(%q) = %v, want an error with %q", in, err, want)
		}
	}
}

func TestIDTemplateRender(t *testing.T) {
	tm, err := ParseIDTemplate("{activity_id}/order-{data.order.id}")
	if err != nil {
		t.Fatal(err)
	}
	for data, want := range map[string]string{
		`{"order":{"id":"A-1"}}`:                   "r/order-A-1",
		`{"order":{"id":42},"x":1}`:                "r/order-42",
		`{"order":{"id":-7}}`:                      "r/order--7",
		`{"order":{"id":"ü \"q\""}}`:               `r/order-ü "q"`,
		`{"order":{"id":12345678901234567890123}}`: "r/order-12345678901234567890123",
	} {
		got, err := tm.Render("r", json.RawMessage(data))
		if err != nil || got != want {
			t.Errorf("Render(%s) = %q, %v; want %q", data, got, err, want)
		}
	}
	// Every failure names the path and is undecodable (ErrTemplate).
	for data, want := range map[string]string{
		`{"order":{}}`:               "data.order.id: missing",
		`{}`:                         "data.order.id: missing",
		`{"order":{"id":""}}`:        "empty string",
		`{"order":{"id":"a\u0007"}}`: "control character",
		`{"order":{"id":4.2}}`:       "a non-integer number is not",
		`{"order":{"id":1e3}}`:       "a non-integer number is not",
		`{"order":{"id":true}}`:      "a boolean",
		`{"order":{"id":null}}`:      "null",
		`{"order":{"id":{"a":1}}}`:   "an object",
		`{"order":"x"}`:              "order is not an object",
		`["order"]`:                  "data is not a JSON object",
		`null`:                       "data is not a JSON object",
		`"text"`:                     "data is not a JSON object",
	} {
		_, err := tm.Render("r", json.RawMessage(data))
		if !errors.Is(err, ErrTemplate) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "data.order.id") {
			t.Errorf("Render(%s) = %v, want ErrTemplate naming data.order.id with %q", data, err, want)
		}
	}
	long, err := tm.Render("r", json.RawMessage(`{"order":{"id":"`+strings.Repeat("x", 1000)+`"}}`))
	if !errors.Is(err, ErrWorkflowIDTooLong) {
		t.Errorf("a 1009-byte ID: %q, %v; want ErrWorkflowIDTooLong", long, err)
	}
}
