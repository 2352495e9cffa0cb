module nsqc/go-nsq-driver

go 1.19

require github.com/nsqio/go-nsq v1.1.0

require github.com/golang/snappy v0.0.4 // indirect; the version the local module proxy has; go-nsq asks v0.0.1 or newer
