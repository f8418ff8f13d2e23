"""Packaging beyond what pyproject.toml can say: the top-level properties/ folder ships as recbole_fbsm/properties."""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["recbole_fbsm*"]) + ["recbole_fbsm.properties"],
    package_dir={"recbole_fbsm.properties": "properties"},
)
