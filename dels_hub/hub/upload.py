"""Publish a staged repo with ``HfApi().upload_folder``, after checking it is fit to publish.

Before anything is sent the repo must: have a model card (README.md with metadata), hold no pickled weights
(``*.bin``, ``*.pt``, ``*.pth``, ``*.pkl``, ``*.ckpt``: loading them runs code), and load with ``from_pretrained``
the way users will load it (a head with ``DeLSLocalHead``, a drafter with ``DFlashDraftModel``, an adapter with
peft over its base head), strictly. ``--dry-run`` stops after the checks and prints the file list and the card
metadata; it never contacts the Hub.
"""

import json
from pathlib import Path

from huggingface_hub import ModelCard
from huggingface_hub.utils import filter_repo_objects

from ..errors import RepoCardError, RepoCheckError
from ..locations import is_hub_id
from .card import PLACEHOLDER_ORG, repo_kind

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
# Training leftovers that are not part of a model repo (resumable states live under checkpoints/).
DEFAULT_IGNORE = ["checkpoints/*", "checkpoints/**", ".cache/**", "*.lock", "**/__pycache__/**", "*.pyc"]


def repo_files(repo_dir: Path, ignore_patterns: list[str]) -> list[str]:
    """Relative paths (posix) of the files ``upload_folder`` would send, sorted."""
    paths = sorted(p.relative_to(repo_dir).as_posix() for p in repo_dir.rglob("*") if p.is_file())
    return list(filter_repo_objects(paths, ignore_patterns=ignore_patterns))


def _load(repo_dir: Path, kind: str) -> None:
    """Load the repo as a user would; any failure is a RepoCheckError naming the repo and the cause."""
    from ..loading import load_dflash, load_head

    try:
        if kind == "head":
            load_head(str(repo_dir))
        elif kind == "dflash":
            load_dflash(str(repo_dir))
        else:  # the base head as users will find it: by Hub id, or staged beside the adapter
            load_head(str(repo_dir))
    except Exception as error:  # any loading failure blocks the upload; the cause is kept in the message
        raise RepoCheckError(f"{repo_dir} does not load as a {kind}: {type(error).__name__}: {error}") from error


def check_repo(repo_dir, ignore_patterns: list[str] | None = None) -> dict:
    """``{"kind", "files", "card"}`` of a repo fit to publish; raises ``RepoCheckError`` otherwise."""
    repo_dir = Path(repo_dir)
    if not repo_dir.is_dir():
        raise RepoCheckError(f"{repo_dir} is not a folder")
    ignore = DEFAULT_IGNORE + list(ignore_patterns or [])
    files = repo_files(repo_dir, ignore)
    pickled = [name for name in files if name.lower().endswith(PICKLE_SUFFIXES)]
    if pickled:
        raise RepoCheckError(
            f"{repo_dir} holds pickled files {pickled}: loading them can run arbitrary code. Save with "
            "safetensors (save_pretrained does by default) and delete them, or pass --ignore for files not "
            "meant for the Hub"
        )
    if "README.md" not in files:
        raise RepoCheckError(f"{repo_dir} has no README.md model card: run `dels-hub card {repo_dir}` first")
    card_data = ModelCard.load(repo_dir / "README.md").data.to_dict()
    if not card_data:
        raise RepoCheckError(f"{repo_dir}/README.md has no metadata block: run `dels-hub card {repo_dir}`")
    try:
        kind = repo_kind(repo_dir)
    except RepoCardError as error:
        raise RepoCheckError(str(error)) from error
    weights = [name for name in files if name.endswith(".safetensors")]
    if not weights:
        raise RepoCheckError(f"{repo_dir} has no .safetensors weights")
    if kind == "adapter":
        _check_adapter_base(repo_dir)
    _load(repo_dir, kind)
    return {"kind": kind, "files": files, "card": card_data, "ignore_patterns": ignore}


def adapter_base_name(repo_dir: Path) -> str:
    return json.loads((Path(repo_dir) / "adapter_config.json").read_text()).get("base_model_name_or_path") or ""


def _check_adapter_base(repo_dir: Path) -> None:
    """A published adapter must name its base head by Hub id: a local path means nothing to anyone else."""
    base = adapter_base_name(repo_dir)
    if not base:
        raise RepoCheckError(f"{repo_dir}/adapter_config.json has no base_model_name_or_path")
    if base.count("/") != 1 or not is_hub_id(base):
        raise RepoCheckError(
            f"{repo_dir}/adapter_config.json names its base head by the local path {base!r}, which means nothing "
            "on the Hub: publish the base head, then set base_model_name_or_path to its Hub id ORG/NAME (a base "
            "staged beside the adapter, in a folder NAME whose card has repo_id ORG/NAME, is found there)"
        )


def upload_repo(
    repo_dir,
    repo_id: str,
    *,
    dry_run: bool = False,
    private: bool = False,
    revision: str | None = None,
    create_pr: bool = False,
    commit_message: str | None = None,
    ignore_patterns: list[str] | None = None,
) -> dict:
    """Check ``repo_dir``; unless ``dry_run``, create ``repo_id`` if needed and upload the folder.

    Returns the check result plus ``"commit_url"`` after a real upload.
    """
    if repo_id.count("/") != 1:
        raise RepoCheckError(f"repo id {repo_id!r} must be ORG/NAME")
    report = check_repo(repo_dir, ignore_patterns)
    report["repo_id"] = repo_id
    if dry_run:
        return report
    if report["kind"] == "adapter" and adapter_base_name(repo_dir).startswith(PLACEHOLDER_ORG):
        raise RepoCheckError(
            f"{repo_dir}/adapter_config.json names its base head {adapter_base_name(repo_dir)!r}, a placeholder: set "
            "base_model_name_or_path to the Hub id the base head is published as"
        )
    from huggingface_hub import HfApi

    api = HfApi()
    api.create_repo(repo_id, private=private, exist_ok=True)
    info = api.upload_folder(
        repo_id=repo_id,
        folder_path=str(repo_dir),
        commit_message=commit_message or f"Upload {report['kind']} with dels-hub",
        revision=revision,
        create_pr=create_pr,
        ignore_patterns=report["ignore_patterns"],
    )
    report["commit_url"] = str(getattr(info, "commit_url", info))
    return report


# -- command line ---------------------------------------------------------------------------------------------


def add_upload_arguments(parser) -> None:
    """``dels-hub upload REPO_DIR ORG/NAME [--dry-run]``."""
    parser.add_argument("repo_dir", help="a staged head, adapter or drafter folder (e.g. upload/NAME)")
    parser.add_argument("repo_id", help="the Hub repo to create or update, ORG/NAME")
    parser.add_argument("--dry-run", action="store_true", help="check and print the file list and card metadata only")
    parser.add_argument("--private", action="store_true", help="create the Hub repo as private")
    parser.add_argument("--revision", default=None, help="branch to commit to")
    parser.add_argument("--create-pr", action="store_true", help="open a pull request instead of committing")
    parser.add_argument("--commit-message", default=None)
    parser.add_argument("--ignore", action="append", default=[], metavar="PATTERN",
                        help="extra glob of files not to upload (repeatable)")


def upload_main(args) -> int:
    report = upload_repo(
        args.repo_dir, args.repo_id, dry_run=args.dry_run, private=args.private, revision=args.revision,
        create_pr=args.create_pr, commit_message=args.commit_message, ignore_patterns=args.ignore,
    )
    action = "would upload" if args.dry_run else "uploaded"
    print(f"{report['kind']} {args.repo_dir} -> {report['repo_id']}: {action} {len(report['files'])} files")
    for name in report["files"]:
        size = (Path(args.repo_dir) / name).stat().st_size
        print(f"  {name}  ({size:,} bytes)")
    print("card metadata:")
    print(json.dumps(report["card"], indent=2, ensure_ascii=False, default=str))
    if not args.dry_run:
        print(f"commit: {report['commit_url']}")
    return 0
