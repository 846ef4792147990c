"""``pkg:`` locations: files shipped inside an installed Python package, named portably."""

from pathlib import Path

import pytest

import dels_hub
from dels_hub.errors import PackageLocationError, RecipeError
from dels_hub.generation.loading import load_head
from dels_hub.locations import resolve_location


def test_pkg_location_is_the_installed_package_folder():
    package = Path(dels_hub.__file__).parent
    assert resolve_location("pkg:dels_hub") == str(package / "")
    assert resolve_location("pkg:dels_hub/heads") == str(package / "heads")
    assert resolve_location("upload/some-head") == "upload/some-head"  # paths and Hub ids pass through


def test_missing_package_is_named_before_any_loading():
    with pytest.raises(PackageLocationError, match="'not_a_package_xyz' is not installed") as error:
        load_head("pkg:not_a_package_xyz/head")
    assert isinstance(error.value, RecipeError)  # recipes raised RecipeError for it before


@pytest.mark.parametrize("location, message", [
    ("pkg:", "name a Python package"),
    ("pkg:not_a_package_xyz.sub/x", "'not_a_package_xyz.sub' is not installed"),
    ("pkg:json.decoder", "is a module, not a package folder"),
])
def test_bad_pkg_locations_say_what_is_wrong(location, message):
    with pytest.raises(PackageLocationError, match=message):
        resolve_location(location)
