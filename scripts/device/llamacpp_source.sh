#!/usr/bin/env bash
# Packs the llama.cpp sources the device run builds llama-bench from (e2e.sh build-llama): the
# llama.cpp that llama-cpp-python 0.3.36 vendors (0c1e57098), taken from that release's source
# package on PyPI (checked against its sha256), without what the CUDA build of llama-bench does
# not read (docs, models, media, tests, benches, examples, gguf-py: 176 MB -> ~8 MB packed, so it
# travels to the device machine beside the bundle within the 64 MiB limit). Writes
# .cache/llamacpp/llama.cpp-0c1e57098.tar.xz; nothing is committed.
#
#   bash scripts/device/llamacpp_source.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
DEST="$ROOT/.cache/llamacpp"
OUTFILE="$DEST/llama.cpp-0c1e57098.tar.xz"
SDIST=llama_cpp_python-0.3.36.tar.gz
SHA=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
if [ -s "$OUTFILE" ]; then
  echo "$OUTFILE is there"
  exit 0
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# The file's address from the package index's simple page (pip download would build the
# package's metadata, which needs its build backend).
python3 - "$WORK/$SDIST" "$SDIST" <<'PY'
import re, sys, urllib.request
out, name = sys.argv[1], sys.argv[2]
page = urllib.request.urlopen("https://pypi.org/simple/llama-cpp-python/", timeout=60).read().decode()
urls = [u for u in re.findall(r'href="([^"#]+)', page) if u.endswith("/" + name)]
if not urls:
    sys.exit(f"{name} is not on the index page")
urllib.request.urlretrieve(urls[0], out)
PY
echo "$SHA  $WORK/$SDIST" | sha256sum -c --quiet
tar -xzf "$WORK/$SDIST" -C "$WORK" llama_cpp_python-0.3.36/vendor/llama.cpp
mkdir -p "$DEST"
tar -cJf "$OUTFILE.tmp" -C "$WORK/llama_cpp_python-0.3.36/vendor" \
  --exclude=llama.cpp/docs --exclude=llama.cpp/models --exclude=llama.cpp/media \
  --exclude=llama.cpp/tests --exclude=llama.cpp/benches --exclude=llama.cpp/examples \
  --exclude=llama.cpp/gguf-py --exclude=llama.cpp/.git llama.cpp
mv "$OUTFILE.tmp" "$OUTFILE"
ls -l "$OUTFILE"
