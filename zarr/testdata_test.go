package zarr_test

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// testdataDir holds the stores that zarr-python, numcodecs and tensorstore
// wrote, and their expected values (README.md there lists them).
var testdataDir = filepath.Join("..", "testdata")

// TestTestdata reads every committed store of ../testdata, with no Python
// needed: metadata, the whole array, boxes reaching outside it on every
// side (read as the fill value) and random boxes, each equal bit for bit
// to the expected .npy; the store outside the formats damacy reads fails
// with ErrUnsupported naming what it lacks.
func TestTestdata(t *testing.T) {
	entries := zarrtest.ReadTestdata(t, testdataDir)
	if len(entries) < 100 {
		t.Fatalf("../testdata/manifest.json lists %d arrays, want over 100", len(entries))
	}
	checkCrossEntries(t, testdataDir, entries, rand.New(rand.NewPCG(zarrtest.Seed(t), 4)), 40)
}

// TestTestdataNGFF checks the structure of the OME-NGFF image with labels,
// as 0.5 over zarr v3 and as 0.4 over zarr v2 (the twins hold the same
// values): a c,z,y,x uint16 image of 3 levels, and a labels group listing
// "cells" (uint32) and "nuclei" (uint8), each a z,y,x multiscale image
// with image-label metadata whose levels match the image's spatial shape
// and scales.
func TestTestdataNGFF(t *testing.T) {
	for _, tt := range []struct {
		dir, version string
		labelsDoc    string // the labels group's metadata document
		attrs        func(doc []byte) (json.RawMessage, error)
	}{
		{"image_labels_v05.zarr", "0.5", "zarr.json", func(doc []byte) (json.RawMessage, error) {
			var v struct {
				Attributes struct {
					OME json.RawMessage `json:"ome"`
				} `json:"attributes"`
			}
			err := json.Unmarshal(doc, &v)
			return v.Attributes.OME, err
		}},
		{"image_labels_v04.zarr", "0.4", ".zattrs", func(doc []byte) (json.RawMessage, error) {
			return doc, nil
		}},
	} {
		t.Run(tt.dir, func(t *testing.T) {
			group := filepath.Join(testdataDir, "ngff", tt.dir)
			img, err := zarr.OpenNGFF(group)
			if err != nil {
				t.Fatal(err)
			}
			if img.Version() != tt.version || !slices.Equal(axisNames(img), []string{"c", "z", "y", "x"}) || len(img.Levels()) != 3 {
				t.Fatalf("image: version %s, axes %q, %d levels; want %s, [c z y x], 3", img.Version(), axisNames(img), len(img.Levels()), tt.version)
			}
			doc, err := os.ReadFile(filepath.Join(group, "labels", tt.labelsDoc))
			if err != nil {
				t.Fatal(err)
			}
			attrs, err := tt.attrs(doc)
			if err != nil {
				t.Fatal(err)
			}
			var lg struct {
				Labels []string `json:"labels"`
			}
			if err := json.Unmarshal(attrs, &lg); err != nil || !slices.Equal(lg.Labels, []string{"cells", "nuclei"}) {
				t.Fatalf("labels/%s: labels %q (%v), want [cells nuclei]", tt.labelsDoc, lg.Labels, err)
			}
			for _, name := range lg.Labels {
				lab, err := zarr.OpenNGFF(filepath.Join(group, "labels", name))
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(axisNames(lab), []string{"z", "y", "x"}) || len(lab.Levels()) != 3 {
					t.Fatalf("label %s: axes %q, %d levels; want [z y x], 3", name, axisNames(lab), len(lab.Levels()))
				}
				var meta struct {
					Label *struct {
						Source struct {
							Image string `json:"image"`
						} `json:"source"`
					} `json:"image-label"`
				}
				doc, err := os.ReadFile(filepath.Join(group, "labels", name, tt.labelsDoc))
				if err != nil {
					t.Fatal(err)
				}
				if attrs, err = tt.attrs(doc); err == nil {
					err = json.Unmarshal(attrs, &meta)
				}
				if err != nil || meta.Label == nil || meta.Label.Source.Image != "../../" {
					t.Errorf("label %s: no image-label metadata pointing at ../../ (%v)", name, err)
				}
				for k, lv := range lab.Levels() {
					il, ll := img.Levels()[k], lv
					ia, err := img.Level(k)
					if err != nil {
						t.Fatal(err)
					}
					la, err := lab.Level(k)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(ia.Shape()[1:], la.Shape()) || !slices.Equal(il.Scale[1:], ll.Scale) || !slices.Equal(il.Translation[1:], ll.Translation) {
						t.Errorf("label %s level %d: shape %v, scale %v, translation %v; image %v, %v, %v", name, k,
							la.Shape(), ll.Scale, ll.Translation, ia.Shape(), il.Scale, il.Translation)
					}
					if la.DataType().String() != map[string]string{"cells": "uint32", "nuclei": "uint8"}[name] {
						t.Errorf("label %s level %d: %s", name, k, la.DataType())
					}
				}
			}
		})
	}
}

func axisNames(m *zarr.Multiscale) []string {
	var out []string
	for _, ax := range m.Axes() {
		out = append(out, ax.Name)
	}
	return out
}
