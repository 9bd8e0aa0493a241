package main

import "github.com/spf13/cobra"

func newGenCommand() *cobra.Command { return &cobra.Command{Use: "gen", Hidden: true} }
