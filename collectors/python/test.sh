#!/bin/sh
# The Python hook's tests (npm run test:python). Installs pytest for this user when missing.
set -e
cd "$(dirname "$0")"
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install --quiet --user pytest
exec python3 -m pytest -q -p no:cacheprovider tests
