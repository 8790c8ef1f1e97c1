package testenv

// ChildWithArg is childWithArg for the package's external tests.
var ChildWithArg = childWithArg
