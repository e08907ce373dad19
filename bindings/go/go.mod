module zap

go 1.19
