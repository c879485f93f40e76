# The metadata is in setup.cfg (see there why there is no pyproject.toml).
from setuptools import setup

setup()
