package serve

import (
	"regexp"
	"strings"

	"github.com/damacy-go/damacy/pipeline"
)

// pipelineField finds the pipeline's "Config.Field", "Config.Field[i]"
// and "Config.Field[i].Sub" names in its messages.
var pipelineField = regexp.MustCompile(`\bConfig\.([A-Z][A-Za-z0-9]*)(\[\d+\])?(?:\.([A-Z][A-Za-z0-9]*))?`)

// pythonNames rewrites the pipeline.Config field names in msg, a pipeline
// error's message, as the Python client's Config spells them
// ("Config.MaxChunkBytes" as "Config.max_chunk_uncompressed_bytes",
// "Config.Sources[1].HostBufferBytes" as
// "Config.sources[1].host_buffer_bytes"): its users set those, through
// hello's config keys. A field hello cannot set keeps its Go name.
func pythonNames(msg string) string {
	top := map[string]string{
		"Dtype": "dtype", "SampleShape": "sample_shape", "MappedFileBytes": "mapped_file_bytes",
		"Sources": "sources", "Augment": "augment", "Device": "device",
	}
	for _, k := range configKeys(new(pipeline.Config)) {
		top[k.field] = k.wire
	}
	return pipelineField.ReplaceAllStringFunc(msg, func(m string) string {
		g := pipelineField.FindStringSubmatch(m)
		field, index, inner := g[1], g[2], g[3]
		wire, ok := top[field]
		if !ok {
			return m
		}
		out := "Config." + wire + index
		if inner != "" {
			// The keys of config.sources[i] and config.augment are their
			// fields' names in snake case.
			out += "." + snakeCase(inner)
		}
		return out
	})
}

// snakeCase writes a Go field name in snake case: "IntensitySources" as
// "intensity_sources", "Rot90" as "rot90".
func snakeCase(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	return b.String()
}
