"""dels_hub installed as a wheel, away from its checkout: the card templates ship inside the package, and the demo,
which needs the staged repos of the checkout's upload/ folder, says which path it looked for instead of running an
untrained stand-in."""

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from conftest import make_head, make_tokenizer

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A non-editable install of this checkout (``pip install --target``, dependencies from the test's own
    environment), for a Python run from outside the checkout."""
    site = tmp_path_factory.mktemp("site")
    # Build with the environment's setuptools when it reads pyproject's PEP 639 license (>= 77); else let pip
    # fetch a build backend from the package index.
    own_backend = int(version("setuptools").split(".")[0]) >= 77
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(ROOT)]
                   + (["--no-build-isolation"] if own_backend else []), check=True, capture_output=True, timeout=600)
    return site


def run_installed(site: Path, cwd: Path, *args, upload_dir: Path | None = None):
    env = {name: value for name, value in os.environ.items() if name != "DELS_HUB_UPLOAD_DIR"}
    env |= {"PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    if upload_dir is not None:
        env["DELS_HUB_UPLOAD_DIR"] = str(upload_dir)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_wheel_holds_the_card_templates_and_renders_a_card(installed, tmp_path):
    assert sorted(p.name for p in (installed / "dels_hub" / "hub" / "templates").iterdir()) == ["dflash.md.j2",
                                                                                              "head.md.j2"]
    head = tmp_path / "head"
    make_head(make_tokenizer()).save_pretrained(head)
    where = run_installed(installed, tmp_path, "-c", "import dels_hub; print(dels_hub.__file__)")
    assert where.stdout.strip() == str(installed / "dels_hub" / "__init__.py")  # not the checkout's copy
    result = run_installed(installed, tmp_path, "-m", "dels_hub.cli", "card", str(head))
    assert result.returncode == 0, result.stderr
    assert "# DeLS local head" in (head / "README.md").read_text()


def test_the_installed_demo_names_the_staged_repo_it_looked_for(installed, tmp_path):
    result = run_installed(installed, tmp_path, "-m", "dels_hub.cli", "demo", "--max-new-tokens", "4")
    assert result.returncode == 2
    expected = f"the staged drafter (pass --dflash) '{installed / 'upload' / 'smollm2-135m-dflash-b8'}' does not exist"
    assert expected in result.stderr and "DELS_HUB_UPLOAD_DIR" in result.stderr
    assert "Loading" not in result.stdout  # refused before the target was loaded
    # DELS_HUB_UPLOAD_DIR points the lookup elsewhere, and the message follows it
    elsewhere = run_installed(installed, tmp_path, "-m", "dels_hub.cli", "demo", upload_dir=tmp_path)
    assert f"'{tmp_path / 'smollm2-135m-dflash-b8'}' does not exist" in elsewhere.stderr
