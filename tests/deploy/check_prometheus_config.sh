#!/usr/bin/env bash
# promtool check config + check rules on deploy/prometheus/ (exit 77: promtool not installed).
set -euo pipefail
src="${1:?usage: check_prometheus_config.sh SOURCE_DIR [PROMTOOL]}"
promtool="${2:-$(command -v promtool || true)}"
if [ -z "$promtool" ] || [ ! -x "$promtool" ]; then
  echo "SKIP: promtool not installed (Debian: prometheus)"
  exit 77
fi
# check config also checks the rule files it names (relative to the config file).
"$promtool" check config "$src/deploy/prometheus/prometheus.yml"
"$promtool" check rules "$src/deploy/prometheus/rules.yml"
