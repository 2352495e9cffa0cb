// The driver of go-nsq: the driver contract (conformance/clients/README.md) on nsq.Consumer and nsq.Producer.
// Built locally against go-nsq v1.1.0 (README.md, "go-nsq"); nothing of go-nsq is committed here.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nsqio/go-nsq"
)

type order struct {
	Do      string `json:"do"`
	DelayMs int    `json:"delay_ms"`
	Times   int    `json:"times"`
	EveryMs int    `json:"every_ms"`
}

type operation struct {
	Op      string   `json:"op"`
	Body    string   `json:"body"`
	Bodies  []string `json:"bodies"`
	DeferMs int      `json:"defer_ms"`
}

func emit(event string, fields map[string]interface{}) {
	fields["event"] = event
	line, _ := json.Marshal(fields)
	fmt.Println(string(line))
}

func number(name string, otherwise int) int {
	value, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		return otherwise
	}
	return value
}

type handler struct{}

// go-nsq's ordinary failure: a handler that returns an error has its message requeued, with backoff.
func (handler) HandleMessage(message *nsq.Message) error {
	var o order
	if err := json.Unmarshal(message.Body, &o); err != nil {
		return err
	}
	emit("message", map[string]interface{}{"id": string(message.ID[:]), "attempts": message.Attempts,
		"body": string(message.Body)})
	switch o.Do {
	case "fail":
		return fmt.Errorf("told to fail")
	case "req":
		message.DisableAutoResponse()
		message.RequeueWithoutBackoff(time.Duration(o.DelayMs) * time.Millisecond)
	case "touch":
		message.DisableAutoResponse()
		go func() {
			for i := 0; i < o.Times; i++ {
				time.Sleep(time.Duration(o.EveryMs) * time.Millisecond)
				message.Touch()
			}
			time.Sleep(time.Duration(o.EveryMs) * time.Millisecond)
			message.Finish()
		}()
	}
	return nil
}

func (handler) LogFailedMessage(message *nsq.Message) {
	emit("discarded", map[string]interface{}{"id": string(message.ID[:]), "attempts": message.Attempts})
}

func listed(name string) []string {
	var addresses []string
	for _, address := range strings.Split(os.Getenv(name), ",") {
		if address != "" {
			addresses = append(addresses, address)
		}
	}
	return addresses
}

func main() {
	logger := log.New(os.Stderr, "", log.LstdFlags)
	config := nsq.NewConfig()
	config.HeartbeatInterval = time.Duration(number("NSQC_HEARTBEAT_INTERVAL_MS", 30000)) * time.Millisecond
	addresses := listed("NSQC_NSQD_TCP_ADDRESSES")
	lookupds := listed("NSQC_LOOKUPD_HTTP_ADDRESSES")
	topic := os.Getenv("NSQC_TOPIC")
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)

	if os.Getenv("NSQC_ROLE") == "consumer" {
		config.MaxInFlight = number("NSQC_MAX_IN_FLIGHT", 1)
		config.Snappy = os.Getenv("NSQC_SNAPPY") == "1"
		config.Deflate = os.Getenv("NSQC_DEFLATE") == "1"
		config.AuthSecret = os.Getenv("NSQC_AUTH_SECRET")
		if os.Getenv("NSQC_TLS") == "1" {
			authorities := x509.NewCertPool()
			if pem, err := os.ReadFile(os.Getenv("NSQC_TLS_CA_FILE")); err == nil {
				authorities.AppendCertsFromPEM(pem)
			}
			config.TlsV1 = true
			config.TlsConfig = &tls.Config{RootCAs: authorities, ServerName: "127.0.0.1"}
		}
		config.LookupdPollInterval = time.Duration(number("NSQC_LOOKUPD_POLL_INTERVAL_MS", 60000)) * time.Millisecond
		if longest := number("NSQC_MAX_BACKOFF_MS", 0); longest > 0 {
			config.MaxBackoffDuration = time.Duration(longest) * time.Millisecond
		}
		if attempts := number("NSQC_MAX_ATTEMPTS", 0); attempts > 0 {
			config.MaxAttempts = uint16(attempts)
		}
		consumer, err := nsq.NewConsumer(topic, os.Getenv("NSQC_CHANNEL"), config)
		if err != nil {
			logger.Fatal(err)
		}
		consumer.SetLogger(logger, nsq.LogLevelInfo)
		consumer.AddHandler(handler{})
		if len(lookupds) > 0 {
			if err := consumer.ConnectToNSQLookupds(lookupds); err != nil {
				logger.Print(err)
			}
		} else if err := consumer.ConnectToNSQDs(addresses); err != nil {
			logger.Print(err)
		}
		<-stop
		consumer.Stop()
		<-consumer.StopChan
	} else {
		producer, err := nsq.NewProducer(addresses[0], config)
		if err != nil {
			logger.Fatal(err)
		}
		producer.SetLogger(logger, nsq.LogLevelInfo)
		var operations []operation
		json.Unmarshal([]byte(os.Getenv("NSQC_PUBLISH")), &operations)
		go func() {
			if len(operations) == 0 {
				producer.Ping() // connects, as a publisher about to publish would be
			}
			for _, o := range operations {
				var err error
				switch o.Op {
				case "pub":
					err = producer.Publish(topic, []byte(o.Body))
				case "mpub":
					bodies := make([][]byte, len(o.Bodies))
					for i, body := range o.Bodies {
						bodies[i] = []byte(body)
					}
					err = producer.MultiPublish(topic, bodies)
				case "dpub":
					err = producer.DeferredPublish(topic, time.Duration(o.DeferMs)*time.Millisecond, []byte(o.Body))
				}
				failure := ""
				if err != nil {
					failure = err.Error()
				}
				emit("published", map[string]interface{}{"op": o.Op, "ok": err == nil, "error": failure})
			}
		}()
		<-stop
		producer.Stop()
	}
	emit("stopped", map[string]interface{}{})
}
