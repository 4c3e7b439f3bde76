"""Registers the suite's hooks and shared fixtures; both live in tests/support/."""

pytest_plugins = ["tests.support.plugin", "tests.support.fixtures.shared"]
