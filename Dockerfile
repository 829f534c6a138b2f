# syntax=docker/dockerfile:1
# quota-center image: a static Go binary on distroless, running as non-root.
#   docker build --build-arg VERSION=$(git describe --always --dirty) -t quota-center .
#   docker run -p 8080:8080 -e QC_REDIS_ADDR=… -e QC_MYSQL_DSN=… quota-center
# Without QC_REDIS_ADDR and QC_MYSQL_DSN the container does not start: the
# binary is built with -tags nodev, which leaves dev mode (miniredis, SQLite)
# out and says so; dev mode would also refuse QC_HTTP_ADDR=:8080 (it listens
# on loopback only). For dev mode run `make run` from a checkout.
# Migrations: override the entrypoint,
#   docker run --entrypoint /usr/local/bin/quota-center quota-center migrate

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
COPY api/go.mod api/go.sum ./api/
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -tags nodev -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/quota-center ./cmd/quota-center

# The runtime base is pinned by digest (the multi-arch index of :nonroot on
# 2026-08-26; update with `crane digest gcr.io/distroless/static-debian12:nonroot`).
# The build stage's golang:1.26 is not pinned yet (no digest verified); it
# leaves nothing in the image but the static binary.
FROM gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab
COPY --from=build /out/quota-center /usr/local/bin/quota-center
USER nonroot:nonroot
EXPOSE 8080
ENV QC_HTTP_ADDR=:8080
ENTRYPOINT ["/usr/local/bin/quota-center", "serve"]
