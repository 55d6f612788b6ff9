"""What a trial and the sweep's driver say to each other through Ray Tune: the keys of a trial's
reports and of the config the searcher hands it. Plain strings, because Tune carries dicts; they
live here, in one place, so that the trial (trial.py), the searcher (search.py), the callback that
records trials (progress.py) and the driver (sweep.py) agree without importing one another.
"""

from __future__ import annotations

__all__ = ["CONSTRAINTS_ATTR", "ESTIMATE_KEY", "FINAL_KEY", "GROUP_KEY", "META_PREFIX", "NUMBER_KEY"]

# In the config the searcher hands a trial (beside the searched parameters):
META_PREFIX = "elastune_"  # every key the searcher adds starts with it; the rest are parameters
NUMBER_KEY = "elastune_number"  # the proposal's number, in the order the sampler drew it
ESTIMATE_KEY = "elastune_estimate"  # the predicted peak bytes the searcher priced it at

# In a trial's reports:
FINAL_KEY = "elastune_final"  # present (True) only in a trial's last report: it ran to the end
CONSTRAINTS_ATTR = "elastune_constraints"  # in the final report: {"memory": x, "quality": y}, <= 0 feasible
GROUP_KEY = "train_placement_group"  # a worker group's reports: its placement group's id (hex)
