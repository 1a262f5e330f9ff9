// Package repotest holds checks over the whole repository's source that
// belong to no one package: today, that every product file and function
// stays short enough for a newcomer to read (sizes_test.go). It has no
// product code.
package repotest
