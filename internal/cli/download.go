package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tideml/tide/api"
)

func (r *run) jobDownload() *cobra.Command {
	var (
		dir, outputName string
		all             bool
	)
	cmd := &cobra.Command{
		Use:   "download NAME [--download-path D] [--output-name X] [--all]",
		Short: "Download a job's outputs and logs",
		Long: `Download what a job kept, laid out as 'az ml job download' does:
the default artifacts (outputs/ and logs/, except named outputs) under
D/artifacts/, and a named output X (the folder bound to ${{outputs.X}})
under D/named-outputs/X/. --all downloads both. --output-name default
names the default artifacts, as in Azure ML. Progress goes to standard
error: a bar on a terminal, one line per file otherwise.`,
		Args: r.exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if all && outputName != "" {
				return usagef("--all and --output-name: pass one or the other")
			}
			cl, err := r.client()
			if err != nil {
				return err
			}
			return r.download(cmd.Context(), cl, args[0], dir, outputName, all)
		},
	}
	cmd.Flags().StringVarP(&dir, "download-path", "p", ".", "folder to download into")
	cmd.Flags().StringVarP(&dir, "output-dir", "d", ".", "same as --download-path")
	cmd.Flags().StringVar(&outputName, "output-name", "", "download only this named output")
	cmd.Flags().BoolVar(&all, "all", false, "download the default artifacts and every named output")
	return cmd
}

// download is one file to fetch and where it goes, relative to the
// download folder.
type download struct {
	api.Artifact
	dest string
}

// planDownload picks the artifacts to fetch and their destinations. named
// are the job's named outputs; outputName selects one of them.
func planDownload(arts []api.Artifact, named []string, outputName string, all bool) ([]download, error) {
	isNamed := map[string]bool{}
	for _, n := range named {
		isNamed[n] = true
	}
	// "default" is Azure ML's name for the default artifacts, unless the
	// job has an output of that name.
	if outputName == defaultOutput && !isNamed[defaultOutput] {
		outputName = ""
	}
	if outputName != "" && !isNamed[outputName] {
		if len(named) == 0 {
			return nil, usagef("--output-name %s: the job has no named outputs; drop --output-name to download its artifacts", outputName)
		}
		return nil, usagef("--output-name %s: not an output of the job; its outputs are %s", outputName, strings.Join(named, ", "))
	}
	var plan []download
	for _, a := range arts {
		p := path.Clean(strings.TrimPrefix(a.Path, "/"))
		if p == "." || p == ".." || strings.HasPrefix(p, "../") {
			return nil, fmt.Errorf("artifact %q: unsafe path; refusing to write outside the download folder", a.Path)
		}
		out := ""
		if rest, ok := strings.CutPrefix(p, "outputs/"); ok {
			first, _, _ := strings.Cut(rest, "/")
			if isNamed[first] {
				out = first
			}
		}
		switch {
		case out != "" && (all || out == outputName):
			plan = append(plan, download{a, path.Join("named-outputs", out, strings.TrimPrefix(p, "outputs/"+out+"/"))})
		case out == "" && outputName == "":
			plan = append(plan, download{a, path.Join("artifacts", p)})
		}
	}
	sort.Slice(plan, func(i, j int) bool { return plan[i].dest < plan[j].dest })
	return plan, nil
}

func (r *run) download(ctx context.Context, cl *api.Client, name, dir, outputName string, all bool) error {
	c, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	j, err := cl.Job(c, r.workspace, name)
	if err != nil {
		return err
	}
	arts, err := cl.Artifacts(c, r.workspace, name)
	if err != nil {
		return err
	}
	named := make([]string, 0, len(j.Outputs))
	for n := range j.Outputs {
		named = append(named, n)
	}
	sort.Strings(named)
	plan, err := planDownload(arts, named, outputName, all)
	if err != nil {
		return err
	}
	if len(plan) == 0 {
		if !api.JobTerminal(j.Status) {
			return fmt.Errorf("job %s: no artifacts yet (status %s); they are kept when the job ends", name, j.Status)
		}
		fmt.Fprintf(r.app.Stderr, "Job %s kept no files to download.\n", name)
		return nil
	}
	progress := isTerminal(r.app.Stderr)
	var total, want int64
	for _, d := range plan {
		want += d.Size
	}
	for i, d := range plan {
		if progress {
			fmt.Fprintf(r.app.Stderr, "\r\033[K%s [%d/%d] %s (%s)", bar(total, want, 20), i+1, len(plan), d.Path, bytesize(d.Size))
		} else {
			fmt.Fprintf(r.app.Stderr, "[%d/%d] %s (%s)\n", i+1, len(plan), d.Path, bytesize(d.Size))
		}
		n, err := fetch(ctx, cl, r.workspace, name, d.Path, filepath.Join(dir, filepath.FromSlash(d.dest)))
		if err != nil {
			if progress {
				fmt.Fprintln(r.app.Stderr)
			}
			return err
		}
		total += n
	}
	if progress {
		fmt.Fprint(r.app.Stderr, "\r\033[K")
	}
	fmt.Fprintf(r.app.Stdout, "Downloaded %s (%s) of job %s to %s.\n", plural(len(plan), "file"), bytesize(total), name, dir)
	return nil
}

// fetch writes one artifact to dest through a temporary file, so an
// interrupted download leaves no truncated file behind.
func fetch(ctx context.Context, cl *api.Client, ws, job, artifact, dest string) (int64, error) {
	body, _, err := cl.OpenArtifact(ctx, ws, job, artifact)
	if err != nil {
		return 0, err
	}
	defer body.Close()
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return 0, fmt.Errorf("downloading %s: %w", artifact, err)
	}
	f, err := os.CreateTemp(filepath.Dir(dest), ".download-*")
	if err != nil {
		return 0, fmt.Errorf("downloading %s: %w", artifact, err)
	}
	n, err := io.Copy(f, body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), dest)
	}
	if err != nil {
		os.Remove(f.Name())
		return 0, fmt.Errorf("downloading %s: %w", artifact, err)
	}
	return n, nil
}

// defaultOutput is Azure ML's name for a job's default artifacts.
const defaultOutput = "default"

// bar draws done/total as a bar of width cells.
func bar(done, total int64, width int) string {
	n := width
	if total > 0 {
		n = int(done * int64(width) / total)
	}
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}

func bytesize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// plural is "1 file", "2 files".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
