#!/usr/bin/env bash
# Build the course website into site/ (see docs/README.md):
#
#     bash docs/build.sh                      # the whole site: every notebook executed (a few minutes)
#     bash docs/build.sh --notebooks '01_*'   # options go to docs/gen_site.py (--help)
#
# The first run installs the [docs] extra into the active environment and KaTeX (with Material's search shim) from npm into docs/node_modules;
# after that, building and reading need no network. Open site/index.html in a browser.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! python -c "import mkdocs, material, mkdocs_jupyter, mkdocstrings_handlers.python, nbclient, ipykernel" 2>/dev/null; then
    python -m pip install -q -e ".[docs]"
fi
if [ ! -f docs/node_modules/katex/dist/katex.min.js ] || [ ! -f docs/node_modules/iframe-worker/shim/index.js ]; then
    npm ci --prefix docs --no-audit --no-fund --loglevel=error     # the versions pinned in docs/package-lock.json
fi
start=$(date +%s)
python docs/gen_site.py "$@"
NO_MKDOCS_2_WARNING=1 python -m mkdocs build -q -f docs/_build/mkdocs.yml
echo "built site/ in $(( $(date +%s) - start )) s: open site/index.html"
