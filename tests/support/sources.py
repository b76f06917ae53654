"""What the wheel is built from: tests/test_packaging.py builds it from these, and
config/deploy/Dockerfile must copy the same (tests/test_deploy.py).  Everything else in the
checkout (.venv, .git, tests, bench) is left out."""

SOURCES = ["pyproject.toml", "collector", "reporter", "lua", "config", "README.md", "LICENSE"]
