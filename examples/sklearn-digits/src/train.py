"""Train a scikit-learn classifier on the digits data set that ships with
scikit-learn (1,797 8x8 images, no download), report its accuracy and write
metrics and the model to ./outputs, which tide keeps as the job's artifacts."""

import argparse
import json
import os
import pickle
import time

from sklearn.datasets import load_digits
from sklearn.metrics import accuracy_score, classification_report
from sklearn.model_selection import train_test_split
from sklearn.svm import SVC


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--C", type=float, default=10.0, help="SVM regularization")
    parser.add_argument("--gamma", type=float, default=0.001, help="RBF kernel width")
    parser.add_argument("--output", default="outputs", help="folder for metrics and model")
    args = parser.parse_args()

    start = time.time()
    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        digits.data, digits.target, test_size=0.25, random_state=0, stratify=digits.target)
    print(f"digits: {len(x_train)} training and {len(x_test)} test images")

    model = SVC(C=args.C, gamma=args.gamma)
    model.fit(x_train, y_train)
    predicted = model.predict(x_test)
    accuracy = accuracy_score(y_test, predicted)
    print(classification_report(y_test, predicted, digits=3))
    print(f"accuracy: {accuracy:.4f}")

    os.makedirs(args.output, exist_ok=True)
    metrics = {"accuracy": accuracy, "C": args.C, "gamma": args.gamma,
               "train_size": len(x_train), "test_size": len(x_test),
               "seconds": round(time.time() - start, 3)}
    with open(os.path.join(args.output, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    with open(os.path.join(args.output, "model.pkl"), "wb") as f:
        pickle.dump(model, f)
    print(f"wrote {args.output}/metrics.json and {args.output}/model.pkl")


if __name__ == "__main__":
    main()
