module github.com/libzap/libzap/bindings/go

go 1.19
