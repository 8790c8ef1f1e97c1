// Package minorupgrade holds the end-to-end rehearsal of a Kubernetes
// upgrade: a mixed local cluster booted at the previous minor is upgraded
// to the current one while a Windows workload stays served. It boots its
// own world, apart from packages localworld and daytwo, so that go test
// runs the three packages' worlds side by side, each in its own process;
// it is the only world booted at the previous minor.
package minorupgrade
