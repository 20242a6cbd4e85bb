module github.com/rdmago/rdmago

go 1.26.0

require (
	github.com/klauspost/cpuid/v2 v2.4.2 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.50.0 // indirect
	gonum.org/v1/gonum v0.17.0 // indirect
)
