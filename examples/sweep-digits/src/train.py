"""Train a linear classifier (stochastic gradient descent) on the digits data
set that ships with scikit-learn, one pass over the training images per
epoch, and log the validation accuracy after each epoch.

The metric lines are tide's zero-dependency form, read from standard output:
    ##tide metric accuracy=0.93 step=3
so a sweep's early termination policy can compare trials epoch by epoch and
stop the poor ones (each line is one evaluation interval). The digits train in
milliseconds, so --pause waits after each epoch, as a larger data set would
take, for the policy to see the trials while they run."""

import argparse
import time
import warnings

import numpy as np
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import SGDClassifier
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--alpha", type=float, required=True, help="L2 regularization strength")
    parser.add_argument("--eta0", type=float, required=True, help="learning rate")
    parser.add_argument("--loss", default="hinge", help="hinge, log_loss, modified_huber or perceptron")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--pause", type=float, default=0.0, help="seconds to wait after each epoch")
    args = parser.parse_args()
    warnings.simplefilter("ignore", ConvergenceWarning)

    digits = load_digits()
    x_train, x_val, y_train, y_val = train_test_split(
        digits.data, digits.target, test_size=0.3, random_state=0, stratify=digits.target)
    scaler = StandardScaler().fit(x_train)
    x_train, x_val = scaler.transform(x_train), scaler.transform(x_val)
    print(f"alpha={args.alpha} eta0={args.eta0} loss={args.loss}: "
          f"{len(x_train)} training and {len(x_val)} validation images")

    model = SGDClassifier(loss=args.loss, alpha=args.alpha, learning_rate="constant",
                          eta0=args.eta0, random_state=0)
    classes = np.unique(digits.target)
    rng = np.random.default_rng(0)
    for epoch in range(args.epochs):
        order = rng.permutation(len(x_train))
        model.partial_fit(x_train[order], y_train[order], classes=classes)
        accuracy = model.score(x_val, y_val)
        print(f"##tide metric accuracy={accuracy:.4f} step={epoch}", flush=True)
        time.sleep(args.pause)


if __name__ == "__main__":
    main()
