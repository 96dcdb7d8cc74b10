"""Importing this module is itself the side effect a hostile checkpoint would want: the tests check it never is."""

IMPORTED = True


def fire() -> None:
    raise AssertionError("a checkpoint ran code")
