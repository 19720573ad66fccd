"""Fit an SVM and save it to the model output folder."""

import argparse
import os
import pickle

from sklearn.svm import SVC

from data import split


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--C", type=float, required=True)
    parser.add_argument("--gamma", type=float, required=True)
    parser.add_argument("--model", required=True)
    args = parser.parse_args()
    x_train, _, y_train, _ = split()
    model = SVC(C=args.C, gamma=args.gamma).fit(x_train, y_train)
    print(f"##tide metric train_accuracy={model.score(x_train, y_train):.4f}")
    os.makedirs(args.model, exist_ok=True)
    with open(os.path.join(args.model, "model.pkl"), "wb") as f:
        pickle.dump(model, f)
    print(f"trained with C={args.C} gamma={args.gamma}")


if __name__ == "__main__":
    main()
