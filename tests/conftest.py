"""Registers the suite's hooks and shared fixtures; both live in tests/support/."""

pytest_plugins = [
    "tests.support.plugin",
    "tests.support.fixtures.shared",
    "tests.support.fixtures.identity",  # an identity provider, an app that reaches it
    "tests.support.loop_watchdog",  # fails a test whose app's loop stalled
    "tests.support.route_cache",  # routes built once per process, not once per app
]
