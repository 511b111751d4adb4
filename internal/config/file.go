package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// loadFile applies the YAML file at path: a mapping of setting keys
// (redis_url) to scalars; a list setting also takes a sequence of scalars.
// An unknown or repeated key is an error naming the key and the file.
func (s *Set) loadFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("cannot read config file %s: %v", path, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("config file %s: %v", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil // empty file
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil // only comments
	}
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("config file %s:%d: want a mapping of settings (key: value), got %s",
			path, root.Line, nodeKind(root))
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		key := k.Value
		if take := s.blocks[key]; take != nil && k.Kind == yaml.ScalarNode {
			if first, dup := seen[key]; dup {
				return fmt.Errorf("config file %s:%d: key %q repeated (first on line %d)", path, k.Line, key, first)
			}
			seen[key] = k.Line
			if err := take(path, v); err != nil {
				return fmt.Errorf("config file %s:%d: %s: %v", path, k.Line, key, err)
			}
			continue
		}
		st := s.byKey[key]
		if k.Kind != yaml.ScalarNode || st == nil || st.hidden {
			return fmt.Errorf("config file %s:%d: unknown key %q%s", path, k.Line, key, s.keyHint(key))
		}
		if first, dup := seen[key]; dup {
			return fmt.Errorf("config file %s:%d: key %q repeated (first on line %d)", path, k.Line, key, first)
		}
		seen[key] = k.Line
		raw, err := scalarText(v, st.kind == kindList)
		if err != nil {
			return &SettingError{Setting: st.name, Source: FromFile, File: path, Line: v.Line, Err: err}
		}
		if err := s.apply(st, raw, FromFile, path, v.Line); err != nil {
			return err
		}
	}
	return nil
}

// scalarText returns the text of a scalar value; a null is empty and, when
// seq is true, a sequence of scalars is joined with commas.
func scalarText(v *yaml.Node, seq bool) (string, error) {
	switch {
	case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
		return "", nil
	case v.Kind == yaml.ScalarNode:
		return v.Value, nil
	case v.Kind == yaml.SequenceNode && seq:
		items := make([]string, 0, len(v.Content))
		for _, it := range v.Content {
			if it.Kind != yaml.ScalarNode {
				return "", fmt.Errorf("want a list of single values, got an item that is %s", nodeKind(it))
			}
			items = append(items, it.Value)
		}
		return strings.Join(items, ","), nil
	}
	if seq {
		return "", fmt.Errorf("want a comma list or a sequence, got %s", nodeKind(v))
	}
	return "", fmt.Errorf("want a single value, got %s", nodeKind(v))
}

func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a sequence"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		return "a single value"
	}
	return "nothing"
}

// keyHint suggests the right key for the usual mistakes: dashes, upper case
// or the environment name.
func (s *Set) keyHint(key string) string {
	k := strings.ToLower(strings.TrimPrefix(strings.ToUpper(key), EnvPrefix))
	k = strings.ReplaceAll(k, "-", "_")
	if st := s.byKey[k]; st != nil && !st.hidden && k != key {
		return fmt.Sprintf(" (did you mean %q?)", k)
	}
	return ""
}
