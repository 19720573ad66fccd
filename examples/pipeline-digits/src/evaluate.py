"""Score the trained model on the held-out images and write a report."""

import argparse
import json
import os
import pickle

from data import split


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--report", required=True)
    args = parser.parse_args()
    _, x_test, _, y_test = split()
    with open(os.path.join(args.model, "model.pkl"), "rb") as f:
        model = pickle.load(f)
    accuracy = model.score(x_test, y_test)
    print(f"##tide metric accuracy={accuracy:.4f}")
    print(f"accuracy: {accuracy:.4f}")
    os.makedirs(args.report, exist_ok=True)
    with open(os.path.join(args.report, "report.json"), "w") as f:
        json.dump({"accuracy": accuracy, "test_size": len(y_test)}, f, indent=2)


if __name__ == "__main__":
    main()
