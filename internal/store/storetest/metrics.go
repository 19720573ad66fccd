package storetest

import (
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

func testMetrics(t *testing.T, open Opener) {
	s := openStore(t, open)
	putWorkspaces(t, s, "ws1")
	batch := []api.Metric{
		{Seq: 3, Name: "loss", Value: 0.9, Step: -1, Time: when(1)},
		{Seq: 3, Name: "acc", Value: 0.5, Step: -1, Time: when(1)},
		{Seq: 7, Name: "loss", Value: 0.4, Step: 2, Time: when(2)},
	}
	update(t, s, func(tx store.Tx) error { return tx.AddMetrics(t.Context(), "ws1", "j", batch) })
	// A resent batch stores nothing twice, even with other values.
	batch[0].Value = 99
	update(t, s, func(tx store.Tx) error { return tx.AddMetrics(t.Context(), "ws1", "j", batch) })
	view(t, s, func(tx store.Tx) error {
		all, err := tx.ListMetrics(t.Context(), "ws1", "j", "")
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 3 || all[0].Name != "acc" || all[1].Name != "loss" || all[1].Value != 0.9 || all[2].Step != 2 {
			t.Errorf("ListMetrics = %+v", all)
		}
		checkUTC(t, "time", all[0].Time, when(1))
		loss, err := tx.ListMetrics(t.Context(), "ws1", "j", "loss")
		if err != nil {
			t.Fatal(err)
		}
		if len(loss) != 2 || loss[0].Seq != 3 || loss[1].Seq != 7 {
			t.Errorf("ListMetrics(loss) = %+v", loss)
		}
		none, err := tx.ListMetrics(t.Context(), "ws1", "other", "")
		if err != nil || len(none) != 0 {
			t.Errorf("ListMetrics of a job without metrics = %v, %v", none, err)
		}
		return nil
	})
}
