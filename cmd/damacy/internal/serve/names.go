package serve

import (
	"regexp"

	"github.com/damacy-go/damacy/pipeline"
)

// pipelineField finds the pipeline's "Config.Field", "Config.Field[i]"
// and "Config.Field[i].Sub" names in its messages.
var pipelineField = regexp.MustCompile(`\bConfig\.([A-Z][A-Za-z0-9]*)(\[\d+\])?(?:\.([A-Z][A-Za-z0-9]*))?`)

// pythonNames rewrites the pipeline.Config field names in msg, a pipeline
// error's message, as the Python client's Config spells them
// ("Config.MaxChunkBytes" as "Config.max_chunk_uncompressed_bytes",
// "Config.Sources[1].HostBufferBytes" as
// "Config.sources[1].host_buffer_bytes"), the fields' JSON names: its
// users set those, through hello's config keys. A field hello cannot set
// keeps its Go name.
func pythonNames(msg string) string {
	return pipelineField.ReplaceAllStringFunc(msg, func(m string) string {
		g := pipelineField.FindStringSubmatch(m)
		field, index, inner := g[1], g[2], g[3]
		wire, ok := pipeline.JSONName(pipeline.Config{}, field)
		if !ok {
			return m
		}
		out := "Config." + wire + index
		if inner != "" {
			var sub any = pipeline.Augment{}
			if field == "Sources" {
				sub = pipeline.Source{}
			}
			name, ok := pipeline.JSONName(sub, inner)
			if !ok {
				name = inner
			}
			out += "." + name
		}
		return out
	})
}
