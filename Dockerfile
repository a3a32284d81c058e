# lockd: a small static image that runs as non-root.
#   docker build -t lockd .
#   docker run -p 8080:8080 -e LOCKD_REDIS=redis://redis:6379/0 -e LOCKD_AUTH_YAML="$(cat auth.yaml)" lockd
# The binary is built exactly as `make build` builds it in CI. The build
# sees no .git (.dockerignore): `make image` passes the version and commit
# as VERSION and COMMIT and tags the image lockd:<version>.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=
ARG COMMIT=
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o /out/lockd ./cmd/lockd

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/lockd /lockd
USER nonroot:nonroot
# In a container lockd must listen beyond loopback: with no API keys it
# refuses to start unless LOCKD_INSECURE_NO_AUTH=true says the network is trusted.
ENV LOCKD_LISTEN=0.0.0.0:8080
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=4s --start-period=5s --retries=3 CMD ["/lockd", "healthcheck"]
ENTRYPOINT ["/lockd", "serve"]
