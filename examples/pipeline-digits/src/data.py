"""The digits data set that ships with scikit-learn, split the same way by
every step."""

from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def split():
    digits = load_digits()
    return train_test_split(digits.data, digits.target, test_size=0.25, random_state=0, stratify=digits.target)
