# dedup's image: the service (`dedup`) and the demo producer, static, on a
# distroless base, as an unprivileged user. The embedded dev stack is not
# in it (it links a whole Temporal server): the lab, integration/, is a
# module of its own and is left out of the build context (.dockerignore).
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# What `dedup version` and dedup_build_info report (`make image` passes
# them; docker-compose.yml too). Empty: "devel" and "unknown", as the build
# context has no .git.
ARG VERSION=
ARG COMMIT=
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/dedupio/dedup/internal/app.Version=${VERSION} -X github.com/dedupio/dedup/internal/app.Commit=${COMMIT}" \
      -o /out/dedup ./cmd/dedup \
 && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/producer ./cmd/producer

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=
ARG COMMIT=
LABEL org.opencontainers.image.source="https://github.com/dedupio/dedup" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}"
COPY --from=build /out/dedup /out/producer /usr/local/bin/
USER nonroot:nonroot
EXPOSE 9464 9465
ENTRYPOINT ["/usr/local/bin/dedup"]
CMD ["run", "--config", "/etc/dedup/dedup.yaml"]
