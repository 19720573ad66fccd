package server

import (
	"net/http"
)

func (s *Server) parseRoutes() []route {
	return []route{
		{method: "POST", pattern: "/v1/parse/{kind}", auth: authSignedIn, summary: "Read an Azure ML YAML file (kind: compute, datastore, environment or job; query file= names it in errors, set= overrides a field) into the JSON the API takes, changing nothing", handler: s.parse},
	}
}

// parse answers the object a YAML file describes, or the file's problems
// with their lines, as the CLI would report them.
func (s *Server) parse(w http.ResponseWriter, r *http.Request) {
	b, err := readBody(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	out, err := s.svc.Parse(r.PathValue("kind"), q.Get("file"), b, q["set"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, out)
}
