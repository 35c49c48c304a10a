package config

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ConfigFileFlag names the YAML file whose keys are flag names.
const ConfigFileFlag = "config-file"

// Source is where a setting's value came from.
type Source struct {
	// Kind is "flag", "env", "file" or "default".
	Kind string
	// Where is the environment variable (env) or file:line (file).
	Where string
}

func (s Source) String() string {
	if s.Where == "" {
		return s.Kind
	}
	return s.Kind + " " + s.Where
}

// Setting is the effective value of one flag and where it came from.
type Setting struct {
	Name   string
	Value  string
	Source Source
	// kind is the YAML tag the value is printed with.
	kind string
}

// Parse parses args into a Config. See ParseSettings.
func Parse(fs *flag.FlagSet, args []string, getenv func(string) string) (Config, error) {
	c, _, err := ParseSettings(fs, args, getenv)
	return c, err
}

// ParseSettings parses args into a Config and reports every setting's
// effective value and source. A value comes from the first of: the
// command line, the NETSY_<NAME> environment variable, the file named by
// --config-file (NETSY_CONFIG_FILE), the default. The Config is then
// validated. Flags the caller registered on fs itself (such as --version)
// are parsed but get no environment or file value and are not reported.
func ParseSettings(fs *flag.FlagSet, args []string, getenv func(string) string) (Config, []Setting, error) {
	c := Default()
	own := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { own[f.Name] = true })
	c.Bind(fs)
	configFile := fs.String(ConfigFileFlag, "", "YAML file whose keys are flag names (flag > environment > file > default)")
	if err := fs.Parse(args); err != nil {
		return c, nil, err
	}
	if fs.NArg() > 0 {
		return c, nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	sources := map[string]Source{}
	fs.Visit(func(f *flag.Flag) { sources[f.Name] = Source{Kind: "flag"} })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if _, set := sources[f.Name]; set || own[f.Name] || envErr != nil {
			return
		}
		name := EnvName(f.Name)
		if v := getenv(name); v != "" {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("--%s (from %s=%q): %w", f.Name, name, v, err)
			}
			sources[f.Name] = Source{Kind: "env", Where: name}
		}
	})
	if envErr != nil {
		return c, nil, envErr
	}
	if *configFile != "" {
		if err := applyFile(fs, *configFile, own, sources); err != nil {
			return c, nil, err
		}
	}
	var settings []Setting
	fs.VisitAll(func(f *flag.Flag) {
		if own[f.Name] {
			return
		}
		s := Setting{Name: f.Name, Value: f.Value.String(), Source: Source{Kind: "default"}, kind: "!!str"}
		if src, ok := sources[f.Name]; ok {
			s.Source = src
		}
		if g, ok := f.Value.(flag.Getter); ok {
			switch g.Get().(type) {
			case bool:
				s.kind = "!!bool"
			case int, int64, uint, uint64:
				s.kind = "!!int"
			}
		}
		settings = append(settings, s)
	})
	return c, settings, c.Validate()
}

// applyFile sets every flag the file names that neither the command line
// nor the environment set.
func applyFile(fs *flag.FlagSet, path string, own map[string]bool, sources map[string]Source) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--%s: %w", ConfigFileFlag, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("--%s %s: %w", ConfigFileFlag, path, err)
	}
	if len(doc.Content) == 0 {
		return nil // empty, or only comments
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("%s:%d: want a mapping of flag names to values (client-addr: 0.0.0.0:2379)", path, root.Line)
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		at := fmt.Sprintf("%s:%d", path, k.Line)
		if k.Kind != yaml.ScalarNode {
			return fmt.Errorf("%s: a key must be a flag name", at)
		}
		key := k.Value
		f := fs.Lookup(key)
		switch {
		case f == nil && fs.Lookup(strings.TrimLeft(key, "-")) != nil:
			return fmt.Errorf("%s: unknown key %q: write the flag name without dashes (%s)", at, key, strings.TrimLeft(key, "-"))
		case f == nil || own[key]:
			return fmt.Errorf("%s: unknown key %q: the keys are netsy's flag names (see netsy -h)", at, key)
		case key == ConfigFileFlag:
			return fmt.Errorf("%s: key %q: a config file cannot name another", at, key)
		}
		if line, dup := seen[key]; dup {
			return fmt.Errorf("%s: key %q is already set on line %d", at, key, line)
		}
		seen[key] = k.Line
		if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
			return fmt.Errorf("%s: %s: want a single value (a string, number, duration or true/false)", at, key)
		}
		if _, set := sources[key]; set {
			continue // the command line or the environment wins
		}
		if err := f.Value.Set(v.Value); err != nil {
			return fmt.Errorf("%s: %s: %q: %w", at, key, v.Value, err)
		}
		sources[key] = Source{Kind: "file", Where: at}
	}
	return nil
}

// WriteSettings writes settings as a YAML config file, each value with its
// source as a comment; the config file itself, if any, is named in a
// comment at the top, so the output is a valid config file.
func WriteSettings(w io.Writer, settings []Setting) error {
	root := &yaml.Node{Kind: yaml.MappingNode}
	header := "netsy effective configuration; precedence: flag > environment > config file > default"
	for _, s := range settings {
		if s.Name == ConfigFileFlag {
			if s.Value != "" {
				header += fmt.Sprintf("\nconfig file: %s (%s)", s.Value, s.Source)
			}
			continue
		}
		root.Content = append(root.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s.Name},
			&yaml.Node{Kind: yaml.ScalarNode, Tag: s.kind, Value: s.Value, LineComment: s.Source.String()})
	}
	root.HeadComment = header
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return err
	}
	return enc.Close()
}
