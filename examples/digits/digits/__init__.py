"""A multi-class classifier of scikit-learn's bundled handwritten digits: an elastune workload from
outside elastune."""

from digits.data import Digits, Vocabulary
from digits.workload import DigitsOptions, DigitsWorkload, PixelClassifier

__all__ = ["Digits", "DigitsOptions", "DigitsWorkload", "PixelClassifier", "Vocabulary"]
