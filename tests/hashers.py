"""A password hasher for tests: the default algorithm at one iteration.

The hash names its own iteration count, so servers started by the tests (with the default
hashers) verify these passwords too; only making them is cheap.
"""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class OneIterationPBKDF2(PBKDF2PasswordHasher):
    iterations = 1
