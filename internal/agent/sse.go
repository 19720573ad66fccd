package agent

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// sseEvent is one server-sent event.
type sseEvent struct {
	Name string
	Data string
}

// readSSE reads events from r and calls fn for each, until r fails or fn
// returns an error. touch is called for every line read, keep-alive comments
// included, so the caller can detect a silent connection.
func readSSE(r io.Reader, touch func(), fn func(sseEvent) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var ev sseEvent
	var data []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err == io.EOF {
				return fmt.Errorf("stream closed by the server: %w", io.ErrUnexpectedEOF)
			}
			return err
		}
		touch()
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if len(data) > 0 {
				ev.Data = strings.Join(data, "\n")
				if ev.Name == "" {
					ev.Name = "message"
				}
				if err := fn(ev); err != nil {
					return err
				}
			}
			ev, data = sseEvent{}, nil
		case strings.HasPrefix(line, ":"):
			// Comment: a keep-alive.
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				ev.Name = value
			case "data":
				data = append(data, value)
			}
		}
	}
}
