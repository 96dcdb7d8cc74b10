"""`torch.distributions.constraints`: the constraint objects as markers (checks say True: serve does not sample
from torch.distributions)."""

from __future__ import annotations

from typing import Any


class Constraint:
    is_discrete = False
    event_dim = 0

    def check(self, value: Any) -> Any:
        return True


real = positive = nonnegative = unit_interval = simplex = boolean = nonnegative_integer = Constraint()
positive_definite = real_vector = independent = greater_than = interval = Constraint()
