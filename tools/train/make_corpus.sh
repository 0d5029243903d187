#!/usr/bin/env bash
# Builds the training corpus of the embedded model, deterministically, into tools/train/data/.
#
# Corpus (all under the PSF License Agreement, see models/LICENSE-PSF.txt):
#   py/  the CPython 3.11 standard library sources as Debian ships them (/usr/lib/python3.11,
#        packages libpython3.11-minimal and libpython3.11-stdlib), minus test suites, the
#        build config, pydoc_data/topics.py (a copy of the docs) and the 70 generated charmap
#        codec tables under encodings/ (hex tables, no language)
#   doc/ the reStructuredText sources of the Python 3.11 documentation, from Debian's
#        python3.11-doc package (usr/share/doc/python3.11/html/_sources/**/*.rst.txt)
# Files are listed in byte order (LC_ALL=C); a file is held out for evaluation when the first
# 8 hex digits of sha256(its corpus name) are 0 mod 25 (about 4%), so the split never depends
# on file contents or on the order of discovery.
#
# Output: data/files.tsv (split, bytes, sha256, name), data/corpus/<name> (the files),
#         data/corpus.sha256 (sha256 of files.tsv: one number that identifies the corpus).
# Needs: dpkg, apt-get (only when the .deb is not already in data/), sha256sum, iconv.
set -euo pipefail
cd "$(dirname "$0")"

PYLIB=${PYLIB:-/usr/lib/python3.11}
DOC_DEB_VERSION=3.11.2-6+deb12u9
DOC_DEB=python3.11-doc_${DOC_DEB_VERSION}_all.deb
DOC_DEB_SHA256=5b3594189d6ef9a6963ce0347fd307a1cc67620ad697e144db366070e2e146be
export LC_ALL=C

mkdir -p data
rm -rf data/corpus data/docx
mkdir -p data/corpus/py data/corpus/doc

# --- 1. standard library sources --------------------------------------------------------------
[ -f "$PYLIB/os.py" ] || { echo "make_corpus: $PYLIB is not a Python 3.11 library folder" >&2; exit 1; }
stdlib_version=$(dpkg-query -W -f='${Version}' libpython3.11-stdlib 2>/dev/null || echo unknown)
echo "stdlib: $PYLIB (libpython3.11-stdlib $stdlib_version)"
(cd "$PYLIB" && find . -name '*.py' \
    -not -path './test/*' -not -path '*/tests/*' -not -path '*/idle_test/*' \
    -not -path './site-packages/*' -not -path './dist-packages/*' -not -path './config-*' \
    -not -path './pydoc_data/topics.py' | sed 's|^\./||' | sort) > data/py.list
grep -v '^encodings/' data/py.list > data/py.keep || true
while read -r f; do
    grep -q 'decoding_table' "$PYLIB/$f" || echo "$f"
done < <(grep '^encodings/' data/py.list) >> data/py.keep
sort -o data/py.keep data/py.keep
while read -r f; do
    mkdir -p "data/corpus/py/$(dirname "$f")"
    cp "$PYLIB/$f" "data/corpus/py/$f"
done < data/py.keep

# --- 2. documentation sources -----------------------------------------------------------------
if [ ! -f "data/$DOC_DEB" ]; then
    (cd data && apt-get download "python3.11-doc=$DOC_DEB_VERSION")
fi
echo "$DOC_DEB_SHA256  data/$DOC_DEB" | sha256sum -c --quiet
dpkg-deb -x "data/$DOC_DEB" data/docx
DOCSRC=data/docx/usr/share/doc/python3.11/html/_sources
(cd "$DOCSRC" && find . -name '*.rst.txt' | sed 's|^\./||' | sort) > data/doc.keep
while read -r f; do
    mkdir -p "data/corpus/doc/$(dirname "$f")"
    cp "$DOCSRC/$f" "data/corpus/doc/$f"
done < data/doc.keep
rm -rf data/docx

# --- 3. file table and split ------------------------------------------------------------------
(cd data/corpus && find . -type f | sed 's|^\./||' | sort) > data/all.list
: > data/files.tsv
while read -r name; do
    iconv -f utf-8 -t utf-8 "data/corpus/$name" > /dev/null 2>&1 ||
        { echo "make_corpus: $name is not UTF-8" >&2; exit 1; }
    h=$(printf '%s' "$name" | sha256sum | cut -c1-8)
    split=train
    [ $(( 16#$h % 25 )) -eq 0 ] && split=heldout
    printf '%s\t%s\t%s\t%s\n' "$split" "$(stat -c %s "data/corpus/$name")" \
        "$(sha256sum "data/corpus/$name" | cut -c1-64)" "$name" >> data/files.tsv
done < data/all.list
rm -f data/py.list data/py.keep data/doc.keep data/all.list
sha256sum data/files.tsv | cut -c1-64 > data/corpus.sha256

awk -F'\t' '{n[$1]++; b[$1]+=$2; split($4, p, "/"); k[p[1]]+=$2; kn[p[1]]++}
    END {for (s in n) printf "%-8s %5d files %10d bytes\n", s, n[s], b[s];
         for (s in k) printf "%-8s %5d files %10d bytes\n", s "/", kn[s], k[s]}' data/files.tsv | sort
echo "corpus id (sha256 of data/files.tsv): $(cat data/corpus.sha256)"
