# Only here because pyproject.toml cannot combine package discovery with the
# extra data packages that map matrices/, templates/ and images/ into the wheel.
from setuptools import find_packages, setup

DATA = ["provisioner._data.matrices", "provisioner._data.templates", "provisioner._data.images"]

setup(packages=find_packages(include=["provisioner", "provisioner.*"]) + DATA)
