package nodelogs

import (
	"encoding/json"
	"time"
)

// IndexFile is the index's name in every collection.
const IndexFile = "index.json"

// Machine is what the index says of the machine the logs are from.
type Machine struct {
	// Name is what the user named (a node, Machine, AzureMachine...).
	Name string `json:"name"`
	// Object is the infrastructure object: AzureMachine/NAME or
	// AzureMachinePoolMachine/NAME.
	Object    string `json:"object,omitempty"`
	Cluster   string `json:"cluster,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Hostname  string `json:"hostname,omitempty"`
	Address   string `json:"address,omitempty"`
	OS        string `json:"os"`
	// Azure names the VM or scale-set instance when Run Command was used.
	Azure string `json:"azure,omitempty"`
}

// Index is a collection's table of contents: a reader of the archive sees
// which files hold output, which commands failed and why, and whether a
// file may be only the end of its log.
type Index struct {
	Machine Machine `json:"machine"`
	// Started and Finished are when the collection ran (UTC).
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// Since is --since's start, when lines before it were dropped.
	Since     *time.Time `json:"since,omitempty"`
	Transport string     `json:"transport"`
	// WhyRunCommand says why the node was not reached over SSH.
	WhyRunCommand string `json:"whyRunCommand,omitempty"`
	// Limit is the transport's most bytes of output per command.
	Limit     int         `json:"outputLimitBytes,omitempty"`
	Collected int         `json:"collected"`
	Failed    int         `json:"failed"`
	Items     []IndexItem `json:"items"`
}

// IndexItem is one item of the plan and what became of it.
type IndexItem struct {
	File      string `json:"file"`
	Command   string `json:"command"`
	Transport string `json:"transport"`
	Bytes     int    `json:"bytes"`
	Truncated bool   `json:"truncated,omitempty"`
	// Error is the command's failure and its error output; ErrorFile
	// holds both with the command.
	Error     string `json:"error,omitempty"`
	ErrorFile string `json:"errorFile,omitempty"`
}

// NewIndex lists the results.
func NewIndex(m Machine, via Transport, results []Result, started, finished, since time.Time) Index {
	idx := Index{Machine: m, Started: started.UTC(), Finished: finished.UTC(), Transport: via.Name, Limit: via.Limit, Items: []IndexItem{}}
	if !since.IsZero() {
		s := since.UTC()
		idx.Since = &s
	}
	for _, r := range results {
		it := IndexItem{File: r.File, Command: r.Command, Transport: r.Transport, Bytes: r.Bytes, Truncated: r.Truncated}
		if r.Err != nil {
			it.Error, it.ErrorFile = r.Err.Error(), r.File+".error"
			if r.Stderr != "" {
				it.Error += ": " + r.Stderr
			}
			idx.Failed++
		} else {
			idx.Collected++
		}
		idx.Items = append(idx.Items, it)
	}
	return idx
}

// Write adds the index to the collection.
func (idx Index) Write(sink Sink) error {
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	return sink.Add(IndexFile, append(b, '\n'))
}
