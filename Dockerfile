# Netsy: static netsy and netsyctl binaries in an empty image, run as a
# non-root user.
#
#   docker build -t netsy:latest .
#   docker run --rm -p 127.0.0.1:2379:2379 netsy:latest --client-addr 0.0.0.0:2379 ...
#
# The image has no shell. It starts in /var/lib/netsy (mount a volume
# there; the default --data-dir is ./netsy-data below it) and takes its
# configuration from flags, NETSY_* variables or --config-file. Listening on any address but loopback takes TLS (see
# docs/security.md) or --insecure-plaintext.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG COMMIT=""
RUN scripts/build-static.sh /out "$COMMIT" \
 && mkdir -p /rootfs/var/lib/netsy /rootfs/etc/ssl/certs /rootfs/tmp \
 && cp /out/netsy /out/netsyctl /rootfs/ \
 && cp /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/ \
 && chown 65532:65532 /rootfs/var/lib/netsy \
 && chmod 1777 /rootfs/tmp

FROM scratch
# The system CAs verify an S3 endpoint's certificate.
COPY --from=build /rootfs/ /
WORKDIR /var/lib/netsy
USER 65532:65532
EXPOSE 2379 2380 2381
VOLUME /var/lib/netsy
ENTRYPOINT ["/netsy"]
