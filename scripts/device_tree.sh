#!/usr/bin/env bash
# The device tool sends the working tree (tracked files and untracked, not ignored ones), at most 64 MiB. The
# weights staged under upload/ are about 107 MB, so a device call runs from a branch that leaves them out:
#
#     scripts/device_tree.sh strip     # switch to branch device-run: the same tree without upload/**.safetensors
#     ...device calls...
#     scripts/device_tree.sh restore   # back to the branch you were on; device-run is deleted
#
# The weights never leave the disk: on device-run they are untracked and ignored (.git/info/exclude).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
BRANCH=device-run
PATTERN='/upload/**/*.safetensors'
EXCLUDE=.git/info/exclude
case "${1:-}" in
  strip)
    git diff --quiet HEAD || { echo "commit or stash your changes first: device-run is cut from HEAD" >&2; exit 1; }
    git rev-parse --abbrev-ref HEAD > .git/device-run-from
    git switch -q -c "$BRANCH"
    grep -qxF "$PATTERN" "$EXCLUDE" || echo "$PATTERN" >> "$EXCLUDE"
    git rm -r -q --cached -- 'upload/**.safetensors'
    git commit -q -m "device run: the tree without the staged weights"
    size=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
    echo "on $BRANCH: tracked files $((size / 1024 / 1024)) MiB (the limit is 64 MiB)"
    ;;
  restore)
    # The ignored copies are overwritten by the identical tracked ones; only then is the exclude dropped.
    git switch -q "$(cat .git/device-run-from)"
    git branch -q -D "$BRANCH"
    grep -vxF "$PATTERN" "$EXCLUDE" > "$EXCLUDE.tmp" || true
    mv "$EXCLUDE.tmp" "$EXCLUDE"
    rm -f .git/device-run-from
    git status --short
    ;;
  *)
    echo "usage: $0 strip|restore" >&2
    exit 2
    ;;
esac
