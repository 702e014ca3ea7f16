// Reads the first document (a Deployment) of a rendered manifest file as Kubernetes does (sigs.k8s.io/yaml
// into typed string fields) and untyped with Go's yaml.v2 and yaml.v3, and prints, as JSON, the engine
// container's args and env as Kubernetes gets them and the Go type each library gives every arg.
// Built by tests/security/test_kube_faithful.py where Go and these libraries are installed (Debian:
// golang-go golang-gopkg-yaml.v2-dev golang-gopkg-yaml.v3-dev golang-k8s-sigs-yaml-dev, GOPATH mode).
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	yamlv2 "gopkg.in/yaml.v2"
	yamlv3 "gopkg.in/yaml.v3"
	"sigs.k8s.io/yaml"
)

type Env struct {
	Name  string `json:"name" yaml:"name"`
	Value string `json:"value" yaml:"value"`
}
type Container struct {
	Args []string `json:"args" yaml:"args"`
	Env  []Env    `json:"env" yaml:"env"`
}
type Deployment struct {
	Spec struct {
		Template struct {
			Spec struct {
				Containers []Container `json:"containers" yaml:"containers"`
			} `json:"spec" yaml:"spec"`
		} `json:"template" yaml:"template"`
	} `json:"spec" yaml:"spec"`
}

func main() {
	data, _ := os.ReadFile(os.Args[1])
	first := strings.Split(string(data), "\n---\n")[1]
	out := map[string]interface{}{}
	var k Deployment
	if err := yaml.Unmarshal([]byte(first), &k); err != nil {
		out["k8s_error"] = err.Error()
	} else {
		out["k8s"] = k.Spec.Template.Spec.Containers[0]
	}
	// untyped reads: what each YAML library resolves a scalar to
	var v2 map[string]interface{}
	if err := yamlv2.Unmarshal([]byte(first), &v2); err == nil {
		c := v2["spec"].(map[interface{}]interface{})["template"].(map[interface{}]interface{})["spec"].(map[interface{}]interface{})["containers"].([]interface{})[0].(map[interface{}]interface{})
		types := []string{}
		for _, a := range c["args"].([]interface{}) {
			types = append(types, fmt.Sprintf("%T", a))
		}
		out["v2_arg_types"] = types
	}
	var v3 map[string]interface{}
	dec := yamlv3.NewDecoder(bytes.NewReader([]byte(first)))
	if err := dec.Decode(&v3); err == nil {
		c := v3["spec"].(map[string]interface{})["template"].(map[string]interface{})["spec"].(map[string]interface{})["containers"].([]interface{})[0].(map[string]interface{})
		types := []string{}
		for _, a := range c["args"].([]interface{}) {
			types = append(types, fmt.Sprintf("%T", a))
		}
		out["v3_arg_types"] = types
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}
