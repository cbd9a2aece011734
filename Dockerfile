# syntax=docker/dockerfile:1
# The operator image: one static binary on distroless, as distroless's nonroot user.
#
#   docker build -t nimbus:0.1.0 .
#
# The chart and config/manager run it as `nimbus:<version>` by default.

# Builds for the platform it runs on: `docker buildx build --platform linux/arm64` builds an
# arm64 binary (under emulation) with the same steps.
FROM docker.io/library/rust:1.95-bookworm AS builder
# musl links everything statically, so the runtime image needs no libc at all; musl-gcc
# compiles ring's C and assembly for it.
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/* \
 && rustup target add "$(uname -m)-unknown-linux-musl"
WORKDIR /src
COPY . .
# The cache mounts keep the registry and compiled dependencies across `docker build`s; the
# binary is copied out of them because they are not part of the image. Symbols are stripped:
# a smaller image, and panics still print their message. Without default features: the image
# has no `nimbus dev` (a local test control plane has no place in production).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    target="$(uname -m)-unknown-linux-musl" \
 && CARGO_PROFILE_RELEASE_STRIP=symbols cargo build --release --locked -p nimbus --no-default-features --target "$target" \
 && cp "target/$target/release/nimbus" /nimbus

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=builder /nimbus /nimbus
# Numeric, so that `runAsNonRoot` can verify it without reading /etc/passwd.
USER 65532:65532
ENTRYPOINT ["/nimbus"]
CMD ["run"]
