# Appdor in one container: a static binary on a small base, run as a non-root
# user. The browser UI is embedded in the binary (web/dist is committed).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/appdor ./cmd/appdor

FROM alpine:3.20
RUN addgroup -S appdor && adduser -S -G appdor -H -s /sbin/nologin appdor
COPY --from=build /out/appdor /usr/local/bin/appdor
USER appdor
EXPOSE 8080
ENV APPDOR_LISTEN=:8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD wget -qO- http://127.0.0.1:8080/readyz >/dev/null || exit 1
ENTRYPOINT ["appdor"]
CMD ["serve"]
