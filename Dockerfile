# dedup's image: the service (`dedup`) and the demo producer, static, on a
# distroless base, as an unprivileged user. The embedded dev stack is not
# in it (it links a whole Temporal server): the lab, integration/, is a
# module of its own and is left out of the build context (.dockerignore).
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/dedup ./cmd/dedup \
 && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/producer ./cmd/producer

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/dedup /out/producer /usr/local/bin/
USER nonroot:nonroot
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/dedup"]
CMD ["run", "--config", "/etc/dedup/dedup.yaml"]
