# podq images. Build the server with `docker build --target server -t podq-server .` and the
# worker (with the gcloud CLI it drives the TPU through) with `--target worker`.

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin podq \
 && install -Dm755 target/release/podq /out/podq

FROM debian:bookworm-slim AS server
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --home /var/lib/podq --create-home podq
COPY --from=build /out/podq /usr/local/bin/podq
COPY experiments /etc/podq/experiments
USER podq
WORKDIR /var/lib/podq
# Listening beyond loopback requires PODQ_ADMIN_TOKEN and PODQ_WORKER_TOKEN.
ENV PODQ_LISTEN=0.0.0.0:8080 \
    PODQ_DB=/var/lib/podq/podq.db \
    PODQ_EXPERIMENTS=/etc/podq/experiments
VOLUME /var/lib/podq
EXPOSE 8080
ENTRYPOINT ["podq"]
CMD ["server"]

FROM debian:bookworm-slim AS worker
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl gnupg openssh-client \
 && curl -fsSL https://packages.cloud.google.com/apt/doc/apt-key.gpg \
    | gpg --dearmor -o /usr/share/keyrings/cloud.google.gpg \
 && echo "deb [signed-by=/usr/share/keyrings/cloud.google.gpg] https://packages.cloud.google.com/apt cloud-sdk main" \
    > /etc/apt/sources.list.d/google-cloud-sdk.list \
 && apt-get update \
 && apt-get install -y --no-install-recommends google-cloud-cli \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --home /var/lib/podq --create-home podq
COPY --from=build /out/podq /usr/local/bin/podq
USER podq
WORKDIR /var/lib/podq
ENTRYPOINT ["podq"]
CMD ["worker"]
