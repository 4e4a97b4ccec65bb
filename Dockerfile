# rankwatch in a container: `collect` on GPU nodes (deploy/collector/daemonset.yaml) and `up`
# (deploy/up/up.yaml). Build from the repository root:
#   docker build -t REGISTRY/rankwatch:0.1.0 .
# (docker buildx build --platform linux/amd64,linux/arm64 for both: the lock file lists chDB's
# native library for each). node:20-slim is Debian (glibc), which chDB's library needs.

# Build: install exactly the lock file, compile, then keep only what runs.
FROM node:20-slim AS build
WORKDIR /src
COPY package.json package-lock.json ./
# --ignore-scripts: the root `prepare` (tsc) needs the sources, copied below; chDB's own install
# script is empty (its library comes in the @chdb/lib-* package for this platform).
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY bin ./bin
COPY core ./core
COPY schema ./schema
COPY sim ./sim
COPY eval ./eval
COPY stream ./stream
COPY detectors ./detectors
COPY store ./store
COPY pipeline ./pipeline
COPY cli ./cli
COPY collectors ./collectors
COPY api ./api
COPY bench ./bench
RUN npm run build && npm prune --omit=dev --ignore-scripts --no-audit --no-fund

# Run: the compiled CLI, its production dependencies (chDB's native library included), no
# compiler, no sources, not root.
FROM node:20-slim
ENV NODE_ENV=production
WORKDIR /opt/rankwatch
COPY --from=build /src/package.json ./
COPY --from=build /src/node_modules ./node_modules
COPY --from=build /src/dist ./dist
COPY --from=build /src/bin ./bin
RUN ln -s /opt/rankwatch/bin/rankwatch.js /usr/local/bin/rankwatch \
  && mkdir -p /var/lib/rankwatch && chown node:node /var/lib/rankwatch
# The image's own user (uid 1000). The DaemonSet runs the collector as root only to read the
# host's kernel log; `up` keeps this user.
USER node
VOLUME /var/lib/rankwatch
EXPOSE 7070 9466
# SIGTERM (docker stop, Kubernetes) drains and closes; node is PID 1 here and handles it.
STOPSIGNAL SIGTERM
ENTRYPOINT ["rankwatch"]
CMD ["--help"]
