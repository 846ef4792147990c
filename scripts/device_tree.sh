#!/usr/bin/env bash
# A remote GPU runner that ships the working tree (tracked files plus untracked, unignored ones) with a size
# limit of 64 MiB cannot take this repository as it is: the weights staged under upload/ are about 107 MB. This
# moves to a temporary branch that leaves them out, and back:
#
#     scripts/device_tree.sh strip     # branch device-run: HEAD without upload/**.safetensors (ignored there)
#     ...the GPU calls...
#     scripts/device_tree.sh restore   # back to where strip started; device-run is deleted
#
# The weights never leave the disk. Commit nothing on device-run: restore refuses to drop such commits.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
BRANCH=device-run
PATTERN='/upload/**/*.safetensors'
LIMIT=$((64 * 1024 * 1024))
EXCLUDE=$(git rev-parse --git-path info/exclude)
MARKER=$(git rev-parse --git-path device-run-from)

sent_bytes() {  # what the runner would ship: tracked files plus untracked files that are not ignored
  git ls-files -z --cached --others --exclude-standard | xargs -0 -r du -cb 2>/dev/null | tail -1 | cut -f1
}

case "${1:-}" in
  strip)
    [[ ! -e $MARKER ]] || { echo "already stripped (from $(cat "$MARKER")): run '$0 restore' first" >&2; exit 1; }
    ! git rev-parse -q --verify "refs/heads/$BRANCH" >/dev/null || { echo "branch $BRANCH exists: delete it first" >&2; exit 1; }
    git diff --quiet HEAD || { echo "commit or stash your changes first: $BRANCH is cut from HEAD" >&2; exit 1; }
    [[ -n $(git ls-files -- 'upload/**.safetensors') ]] || { echo "no tracked upload/**.safetensors to leave out" >&2; exit 1; }
    from=$(git symbolic-ref -q --short HEAD || git rev-parse HEAD)  # a branch name, or a commit when detached
    git switch -q -c "$BRANCH"
    echo "$from" > "$MARKER"
    grep -qxF "$PATTERN" "$EXCLUDE" 2>/dev/null || echo "$PATTERN" >> "$EXCLUDE"
    git rm -r -q --cached -- 'upload/**.safetensors'
    git commit -q --no-verify -m "device run: the tree without the staged weights"
    size=$(sent_bytes)
    echo "on $BRANCH: $((size / 1024 / 1024)) MiB would be sent (limit $((LIMIT / 1024 / 1024)) MiB)"
    ((size <= LIMIT)) || { echo "still over the limit: remove or ignore the large untracked files" >&2; exit 1; }
    ;;
  restore)
    [[ -e $MARKER ]] || { echo "nothing to restore: '$0 strip' was not run" >&2; exit 1; }
    from=$(cat "$MARKER")
    extra=$(git rev-list --count "$from..$BRANCH")
    ((extra <= 1)) || { echo "$BRANCH has $((extra - 1)) commit(s) of yours: move them first" >&2; exit 1; }
    # The ignored copies on disk are overwritten by the identical tracked ones; only then is the exclude dropped.
    if git show-ref -q --verify "refs/heads/$from"; then git switch -q "$from"; else git switch -q --detach "$from"; fi
    git branch -q -D "$BRANCH"
    grep -vxF "$PATTERN" "$EXCLUDE" > "$EXCLUDE.tmp" || true
    mv "$EXCLUDE.tmp" "$EXCLUDE"
    rm -f "$MARKER"
    git status --short
    ;;
  *)
    echo "usage: $0 strip|restore" >&2
    exit 2
    ;;
esac
