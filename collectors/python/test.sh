#!/bin/sh
# The Python hook's tests (npm run test:python). Installs pytest, and torch for the collectives
# test (real torch.distributed on gloo; PyPI's build, ~5 GB, about 70 s here), for this user when
# missing.
set -e
cd "$(dirname "$0")"
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install --quiet --user pytest
if ! python3 -c 'import torch' 2>/dev/null; then
  echo "installing torch 2.15.0 for the hook's collectives test (once; about 5 GB)"
  python3 -m pip install --quiet --user torch==2.15.0
fi
exec python3 -m pytest -q -p no:cacheprovider tests
