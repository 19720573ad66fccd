"""Train a scikit-learn classifier on the digits CSV in the --data folder
(an Azure ML uri_folder input) and write its metrics and model to --model
(a named output, downloaded afterwards with ml_client.jobs.download)."""

import argparse
import csv
import glob
import json
import os
import pickle

from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True, help="folder holding one or more CSV files")
    parser.add_argument("--C", type=float, default=1.0, help="inverse regularisation strength")
    parser.add_argument("--model", required=True, help="output folder")
    args = parser.parse_args()

    rows = []
    for path in sorted(glob.glob(os.path.join(args.data, "*.csv"))):
        with open(path) as f:
            rows.extend(csv.DictReader(f))
    labels = [int(r["label"]) for r in rows]
    features = [[float(r["p%d" % i]) / 16 for i in range(64)] for r in rows]
    print("read %d images from %s" % (len(rows), args.data))

    x_train, x_test, y_train, y_test = train_test_split(features, labels, test_size=0.25, random_state=0)
    model = LogisticRegression(C=args.C, max_iter=500).fit(x_train, y_train)
    accuracy = model.score(x_test, y_test)
    print("accuracy: %.4f" % accuracy)

    os.makedirs(args.model, exist_ok=True)
    with open(os.path.join(args.model, "metrics.json"), "w") as f:
        json.dump({"accuracy": accuracy, "C": args.C, "images": len(rows)}, f, indent=2)
    with open(os.path.join(args.model, "model.pkl"), "wb") as f:
        pickle.dump(model, f)
    print("wrote metrics.json and model.pkl")


if __name__ == "__main__":
    main()
