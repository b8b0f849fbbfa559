package scrape_test

import (
	"fmt"
	"strings"

	"github.com/lbkit/lbkit/examples/prometheus/internal/scrape"
)

func ExampleParse() {
	page := `# TYPE lbkit_picks_total counter
lbkit_picks_total{backend="a:1"} 3
lbkit_picks_total{backend="b:1"} 4
# TYPE lbkit_backend_state gauge
lbkit_backend_state{backend="a:1",state="up"} 0
lbkit_backend_state{backend="a:1",state="ejected"} 1
`
	v, err := scrape.Parse(strings.NewReader(page))
	if err != nil {
		panic(err)
	}
	fmt.Println(v.Sum("lbkit_picks_total"), v.Backends())
	fmt.Println(v.Backend("a:1")["lbkit_backend_state/ejected"], v["lbkit_picks_total{backend=\"b:1\"}"])
	// Output:
	// 7 [a:1 b:1]
	// 1 4
}
